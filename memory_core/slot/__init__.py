"""The host side of the memory slot, as upstream's host runs it around any memory provider:
resolving the slot owner and enforcing the contract on every call (``enforcement``), minted caller
audiences (``audiences``), the legacy-manager adapter (``legacy``) and awaiting sync-or-async
provider code (``awaiting``)."""
