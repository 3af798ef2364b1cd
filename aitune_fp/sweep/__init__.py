"""``aitune-fp sweep``: many models × backends from one TOML file, locally or on a Ray cluster."""
