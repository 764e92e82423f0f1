"""What SGLang asks of a platform: activation (the entry points), the
platform classes, defaults, the version window, conflicts, the mode (dev-mode
state), our names inside SGLang, the request guard. Imports nothing: each
module is imported by its own path."""
