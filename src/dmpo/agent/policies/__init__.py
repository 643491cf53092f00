"""A trained policy outside training: snapshots (`load_policy`) and exports (ONNX, StableHLO)."""
