"""Gate NVIDIA AITune's own strategies with aitune_fp's interleaved statistical decision."""
