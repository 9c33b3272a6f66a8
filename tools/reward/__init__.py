"""Reward profiling for NeMo Gym rollouts: `ars profile` (cli), the join and output files
(profiler), per-task statistics (stats), pass@k (pass_at_k), profile comparison (compare), plots
(plots) and the JSON Lines reader they share (jsonl_stream). Importing this package loads nothing."""
