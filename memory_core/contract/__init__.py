"""The neutral memory-provider contract (``types``): what a provider answers and the host enforces,
imported by the provider, the host and the surfaces' renderer alike."""
