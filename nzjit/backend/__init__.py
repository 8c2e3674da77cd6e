"""The numpy backend: runs a graph of any pipeline stage on the simulated device (`runtime`).

Layers, each a small module (no import cycles; rules never import the plan compiler):

* rule.py - the rule table: one `Rule(impl, specialize=, batch=)` per primitive; rules/ holds
  them, one module per family (scalar, tensor, memory, cube, vector, control). Registering an
  impl-only rule is one decorator: ``@rule(P.some_p)`` over ``def impl(ctx, eqn, ins) -> outs``.
* plan.py - the plan compiler, ``Graph -> Plan`` written once (slots, liveness, the steps a rule's
  forms give, lane batching decided per plan); options.py - the frozen `Options` it is keyed by.
* steps.py, replay.py - what the rules share; values.py, lane_values.py - the run-time values.
* loops.py (for loops), batched.py + lane_state.py + lane_gm.py + lane_cube.py (all lanes at
  once), executor.py (`Ctx`, `run_graph`).
* launch.py (a launch: workers, argument TensorVals, on-chip accounting), convention.py (the
  calling convention of one launch), call.py (programs of calls over ranks), direct_call.py (a
  cached direct call: a cached LaunchPlan).
"""
