"""The fields of NeMo Gym's collection files that reward profiling reads, named once.

`X_materialized_inputs.jsonl` has a line per rollout to run, `X.jsonl` a line per finished
rollout; both carry the two indexes that join them (references/reward-profile-format.md).
"""

TASK = "_ng_task_index"
ROLLOUT = "_ng_rollout_index"
AGENT_REF = "agent_ref"  # {"name": ...}: the agent that ran the rollout
ENV_SERVER = "_ng_environment_server"  # NeMo Gym stamps the Environment Server that ran a rollout
MASK = "mask_sample"  # a result whose reward is not a measurement of the system under test
RESPONSE = "response"  # its `usage` counts are metrics
REWARD = "reward"
ROLLOUT_ID = "rollout_id"  # the first key of a rollout_infos entry: "<task>:<rollout>"
