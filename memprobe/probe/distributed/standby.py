"""Launches started ahead of need (no torch here): the next fresh process group imports while this one runs.

A fresh process group's start is mostly not GPU work: torchrun starts, its ranks start Python and import torch,
the distributed package and the workload's code (transformers, timm). A Standby does that ahead: a torchrun
launch whose ranks import, then wait for `go.json` in the launch's folder, touching no GPU and joining no process
group until then. Handed the request, its ranks go on as any launch's (trial.run): the group is fresh by the
definition, as a trial process forked from the one-GPU scan's fork server is. Prestarted is the launcher of one
multi-GPU scan that keeps one standby of the world size, device and workload family it last launched, started as
that launch starts; what it has not used when the scan ends is ended. MEMPROBE_PRESTART=0 turns it off (default:
on for CUDA, off on the CPU, where the two cores are better left to the running launch).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from memprobe.core.process.child import Child
from memprobe.core.process.rank_record import GO_FILE, RankRequest, StandbyRequest, write_rank_request
from memprobe.core.workload.registry import Workload
from memprobe.probe.distributed.launch import LaunchRequest, LaunchResult, _end, kill_survivors, launch, start_torchrun

PRESTART_ENV = "MEMPROBE_PRESTART"


def prestart_on(device: str, env: dict[str, str] | None = None) -> bool:
    """Whether a multi-GPU scan on `device` starts its launches ahead (MEMPROBE_PRESTART=1/0; default: on CUDA)."""
    value = (os.environ if env is None else env).get(PRESTART_ENV, "").strip().lower()
    if value:
        return value not in ("0", "false", "no", "off")
    return device == "cuda"


class Standby:
    """A torchrun launch of `world_size` ranks whose ranks import and wait for their request (take)."""

    def __init__(self, world_size: int, device: str, workload: Workload, env: dict[str, str] | None = None):
        """Raises OSError when torchrun cannot be started."""
        self.key = (world_size, device, workload.family)

        def request(run_dir: Path) -> StandbyRequest:
            return StandbyRequest(workload.family, device, str(run_dir), os.getpid())

        self.child, self.run_dir = start_torchrun(world_size, device, request, env)
        self.started = time.time()
        self.taken = False

    def fits(self, req: LaunchRequest) -> bool:
        """Whether this standby can run `req`: still up, not taken, the same world size, device and family."""
        key = (req.world_size, req.device, req.workload.family)
        return not self.taken and self.child.alive() and key == self.key

    def take(self, req: LaunchRequest) -> tuple[Child, Path]:
        """Hand `req` to the waiting ranks: (the launcher, the launch's folder), now the caller's."""
        self.taken = True
        write_rank_request(self.run_dir / GO_FILE, RankRequest(req, str(self.run_dir), os.getpid(), prestarted=True))
        return self.child, self.run_dir

    def kill(self) -> None:
        """End the launch, unused (SIGTERM to its session, then SIGKILL; any rank left by its pid file)."""
        if self.taken:
            return
        self.taken = True
        _end(self.child)
        kill_survivors(self.run_dir)
        self.child.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)


class Prestarted:
    """The launcher of one multi-GPU scan: launch(req) with the standby started for it, if one fits, and a new
    standby of the same kind for the launch after; serve(req) likewise for a served group; expect(req) starts a
    standby of another kind ahead (the 1-GPU baseline). close() ends the unused standbys."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.env = env
        self.standbys: dict[tuple, Standby] = {}
        self.prestarted = 0  # launches that took a standby

    @staticmethod
    def _key(req: LaunchRequest) -> tuple:
        return (req.world_size, req.device, req.workload.family)

    def _next(self, req: LaunchRequest) -> Standby | None:
        """The standby for `req` (None where none fits), and a new one of its kind started for the launch after."""
        key = self._key(req)
        standby = self.standbys.pop(key, None)
        if standby is not None and not standby.fits(req):
            standby.kill()
            standby = None
        self.prestarted += standby is not None
        self.standbys[key] = Standby(req.world_size, req.device, req.workload, self.env)
        return standby

    def expect(self, req: LaunchRequest) -> None:
        """Start a standby for a launch like `req` to come, unless one is up."""
        key = self._key(req)
        if key not in self.standbys:
            self.standbys[key] = Standby(req.world_size, req.device, req.workload, self.env)

    def __call__(self, req: LaunchRequest) -> LaunchResult:
        return launch(req, self.env, standby=self._next(req))

    def serve(self, req: LaunchRequest) -> Any:
        """A served group (group.ServedGroup) for the search, on the standby where one fits."""
        from memprobe.probe.distributed.group import ServedGroup

        return ServedGroup(req, self.env, standby=self._next(req))

    def close(self) -> None:
        for standby in self.standbys.values():
            standby.kill()
        self.standbys.clear()
