"""Reward profiling for NeMo Gym rollouts: `ars profile` (cli), the join and output files
(profiler), the collection's fields (nemo_gym), reading them into columns (reading: results,
inputs), the compact rollout_infos entries (entries), writing the profile (writing), the second
process (worker), per-task statistics (stats), pass@k (pass_at_k), profile comparison (compare),
plots (plots) and the JSON Lines reader they share (jsonl_stream). Importing this package loads
nothing."""
