"""Ranking, the second stage of a search: candidates, fusion, decay, MMR and selection (``rank``)."""
