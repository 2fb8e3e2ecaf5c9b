"""The configuration boundary: pydantic v2 models (extra keys forbidden) loaded from TOML.

Every other module receives these validated objects. A bad file raises ``ConfigError`` whose message names
the key, the offending value and the rule. ``file`` holds ``Config`` and loading; ``cooling`` the thermal,
fan and power sections; ``trainer`` the ``[[trainer]]`` tables; ``sections`` the rest; ``base`` what they
share. Like every subpackage's, this ``__init__`` imports nothing.
"""
