"""A deterministic simulator of the whole runtime, in the spirit of FoundationDB's simulation and
TigerBeetle's VOPR: one process, one seed, every source of nondeterminism behind a seam.

- `choices`: every decision drawn from the seed and recorded (replay, shrink);
- `clock`: the virtual clock the database, the systems and the switch cache read;
- `systems`: the business systems, and the record of every request they received;
- `broker`: step messages lost, repeated, reordered, emptied;
- `world`: the real orchestrator, store, sweepers and levers under faults;
- `scenarios`: the workflows a world runs and the policy the oracle holds them to;
- `oracle`: the invariants, judged from what the systems received;
- `run`: schedules from seeds, many in a row, and shrinking a failure to a short trace;
- `mutants`: deliberate bugs in the effect path, to show the oracle kills each.

`agent-jobs simulate --seed S --schedules N` runs it (README: "The simulator").
"""
