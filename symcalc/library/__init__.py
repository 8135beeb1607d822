"""The formula library as data: records, the expression parser and its guards, loading and
validation of the TOML files, presets and the options given values imply. Nothing here solves."""
