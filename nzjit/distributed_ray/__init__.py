"""Ranks in other processes: the Ray actors behind `nzjit.distributed.RayCluster`.

- (backend/remote.py, `RemoteCluster`: what the calling convention needs to hand a validated
  program to a cluster whose ranks it cannot reach directly; no import of ray;)
- `proxy`: the driver's stand-ins for a rank's worker and its tensors (`RemoteWorker`);
- `actor`: the code each rank's actor runs (`RankDevice`: a `runtime.Worker` and the lowered graphs);
- `program`: a validated program cut into one picklable `RankProgram` per rank, dispatched with a
  two-phase commit;
- `windows`: the windows of a program whose ranks communicate, seen from the driver (each one memory
  of its rank's actor);
- `hub`: the actor hosting such a program's comm world (`runtime.comm_remote.WorldHost`);
- `cluster`: `RayCluster` itself.

Importing this package does not import ray; `cluster` imports it when a RayCluster is made.
"""
