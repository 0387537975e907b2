"""The search walk on one read snapshot: the request and reply (``edge``), the one hit type
(``hit``) and the run itself (``run``: retrieval, recall metadata, ranking, selection)."""
