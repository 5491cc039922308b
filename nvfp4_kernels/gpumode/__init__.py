"""The GPU MODE NVFP4 competition's tooling (docs/competition.md): the
custom_kernel adapter (competition), the harness's inputs and statistics
(harness), the evaluation run locally (eval), one-file submissions for
popcorn-cli (bundle) and the problem definitions (tasks). The library itself
needs none of it."""
