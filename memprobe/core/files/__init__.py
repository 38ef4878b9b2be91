"""Files a user names: inputs read bounded, output paths checked before any work."""
