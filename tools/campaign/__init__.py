"""The campaign engine: one campaign's folder and settings (`store`), the lifecycle of an
experiment (`experiment`), proposals for the unattended loop (`proposals`) and the loop itself
(`loop`). Layers import downwards only: cli -> loop -> experiment -> store."""
