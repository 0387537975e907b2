"""The OpenClaw plugin folder (plain ESM JavaScript, no build step), shipped as package data so that
``memory-core plugin path`` can print where it is and ``memory-core plugin install`` can link it.
Nothing here is Python API: this file only makes the folder installable with the wheel."""
