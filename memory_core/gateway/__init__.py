"""The OpenClaw gateway server (protocol 4) for the memory methods."""
