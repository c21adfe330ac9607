"""A `CudaGraphRunner` whose device part runs on the CPU, for tests of what the runner decides (when to
capture, replay, bound its graphs, fall back to eager) without a GPU.

A "graph" is the step itself, captured without running it and run on replay (the step moves the session's
forward count as it runs, so the graph records none). `fail_at` makes one point fail as a GPU would:
"capture" (an op that cannot be captured) or "replay"."""

from __future__ import annotations

from arjet.session.capture import CudaGraphRunner

GRAPH_BYTES = 1000  # what each stand-in capture "reserves"


class StandInRunner(CudaGraphRunner):
    fail_at: str | None = None  # set on a subclass (`failing`)
    reserved = 0

    def _warm(self, step):
        step()

    def _capture(self, step):
        if self.fail_at == "capture":
            raise RuntimeError("stand-in: operation not permitted when stream is capturing")
        StandInRunner.reserved += GRAPH_BYTES
        return step

    def _replay(self, graph):
        if self.fail_at == "replay":
            raise RuntimeError("stand-in: CUDA error: an illegal instruction was encountered")
        graph()

    def _synchronize(self):
        pass

    def _reserved(self):
        return StandInRunner.reserved


def failing(point: str) -> type[StandInRunner]:
    """A stand-in runner that fails at `point` ("capture" or "replay")."""
    return type(f"FailingAt{point.title()}", (StandInRunner,), {"fail_at": point})
