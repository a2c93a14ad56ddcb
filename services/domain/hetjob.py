"""Heterogeneous jobs (Slurm's hetjob): a job of several components, each a gang of its own shape. Pure.

A ``JobSpec`` with ``components`` is one job of ``1 + len(components)`` components: component 0 is the
spec's own shape (``nodes``, ``tasks_per_node``, ``cpus_milli``, ... as for any job), component k >= 1
is ``components[k - 1]`` (a ``Component``: the same shape fields), and everything else (partition,
account, time limit, node selector, command, ...) is the job's, the same for every component.

**Its allocation.** The job's ``NodeAllocation`` s list component 0's nodes first, then component 1's,
and so on, each component's ``nodes`` of them (a heterogeneous job is never elastic, so the counts are
its own): ``by_component`` cuts them back into components. Every component is on nodes of its own
(no node holds two components of one job: the ledger keeps one allocation per job and node), and all
are placed in one decision or none (``services/placement/hetjob.py``).

**What it costs.** Quotas, fair share and the job's size count every component
(``component_specs``: each component as a spec of its own shape; their amounts add up).

A spec without components is its own only component, so every function here answers for any job.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from events import catalogue as c
from services.domain.hostlist import number_ranges
from services.domain.steps import Slots, slots_of

__all__ = ["component_count", "component_specs", "component_spec", "by_component", "component_of",
           "het_group_text", "parse_het_groups", "HetGroupError", "step_slots"]


def component_count(spec: c.JobSpec) -> int:
    """How many components the job has (1 for a job of one shape)."""
    return 1 + len(spec.components)


def component_spec(spec: c.JobSpec, k: int) -> c.JobSpec:
    """Component ``k`` as a spec of its own (without components): the job's fields, with the component's
    shape (and, after the first, no ``nodelist``: the job's names component 0's nodes). Component 0 of a
    job of one shape is the spec itself."""
    if not spec.components:
        if k != 0:
            raise IndexError(f"component {k} of a job of one component")
        return spec
    if k == 0:
        return msgspec.structs.replace(spec, components=())
    part = spec.components[k - 1]
    # the job's --nodelist names component 0's nodes (Slurm's is a component's own option)
    return msgspec.structs.replace(spec, components=(), nodelist=(),
                                   **{name: getattr(part, name) for name in c.COMPONENT_FIELDS})


def component_specs(spec: c.JobSpec) -> list[c.JobSpec]:
    """Every component as a spec of its own, in order (``[spec]`` for a job of one shape)."""
    return [component_spec(spec, k) for k in range(component_count(spec))]


def by_component(spec: c.JobSpec, allocations: Sequence[c.NodeAllocation]) -> list[list[c.NodeAllocation]]:
    """The job's allocations cut into its components, in order: each component's ``nodes`` of them
    (the last takes whatever is left, so an allocation of an unexpected length is never lost). A job of
    one shape: one part, all of them."""
    if not spec.components:
        return [list(allocations)]
    sizes = [spec.nodes] + [part.nodes for part in spec.components]
    out: list[list[c.NodeAllocation]] = []
    at = 0
    for i, size in enumerate(sizes):
        end = len(allocations) if i == len(sizes) - 1 else at + size
        out.append(list(allocations[at:end]))
        at = end
    return out


def component_of(spec: c.JobSpec, allocations: Sequence[c.NodeAllocation]) -> list[int]:
    """The component of each allocation, in the allocations' order."""
    return [k for k, part in enumerate(by_component(spec, allocations)) for _ in part]


class HetGroupError(ValueError):
    """A ``--het-group`` that names no component of the job; the message says which exist."""


def het_group_text(groups: Sequence[int]) -> str:
    """Groups as Slurm writes them: ``0``, ``0,1``, ``1-3``."""
    return number_ranges(groups)


def parse_het_groups(text: str, count: int | None = None) -> tuple[int, ...]:
    """srun's ``--het-group``: indices and ranges, comma separated (``0``, ``0,1``, ``1,3-5``), sorted
    without repeats; each below ``count`` when it is given (the job's components)."""
    groups: set[int] = set()
    for item in str(text).split(","):
        item = item.strip()
        low, dash, high = item.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise HetGroupError(f"--het-group: {text!r} is not a list of component indices (0, 0,1, 1-3)")
        first, last = int(low), int(high) if dash else int(low)
        if last < first or last - first > 1024:
            raise HetGroupError(f"--het-group: {item!r} is not a range of component indices")
        groups.update(range(first, last + 1))
    if count is not None and max(groups) >= count:
        raise HetGroupError(f"--het-group: component {max(groups)} asked for, but the job has "
                            + ("one component (0)" if count == 1 else f"{count} components (0-{count - 1})"))
    return tuple(sorted(groups))


def step_slots(spec: c.JobSpec, allocations: Sequence[c.NodeAllocation],
               groups: Sequence[int] | None = None) -> tuple[list[Slots], list[c.NodeAllocation]]:
    """What a step (srun) inside the job may use, and those components' allocations: the task slots of
    the components ``groups`` (srun's ``--het-group``), in order, each component laid out by its own
    shape; by default component 0 alone, as Slurm's srun in a heterogeneous job (for a job of one shape:
    the whole job). ``HetGroupError`` for a component the job does not have."""
    chosen = tuple(groups) if groups else (0,)
    count = component_count(spec)
    if max(chosen) >= count or min(chosen) < 0:
        raise HetGroupError(f"--het-group: component {max(chosen)} asked for, but the job has "
                            + ("one component (0)" if count == 1 else f"{count} components (0-{count - 1})"))
    parts = by_component(spec, allocations)
    slots: list[Slots] = []
    held: list[c.NodeAllocation] = []
    for k in sorted(set(chosen)):
        shape = component_spec(spec, k)
        slots.extend(slots_of(parts[k], shape.tasks_per_node, shape.cpus_milli, shape.ntasks))
        held.extend(parts[k])
    return slots, held
