"""The course kit's table: one entry per assignment, read by the grader (scripts/grade.py), the
kit check CI runs (scripts/check_kit.py) and the tests of both (tests/python/test_assignments.py).

Each assignment is a set of marked regions in the reference code (scripts/make_assignment.py
finds them by their id), a pytest marker, a Catch2 tag where the C++ tests cover it, a lab run
with --quick whose output changes when the stage is written, and the assignments it needs
written (`requires`: its tests go through their stages, where a stub's fallback is not enough:
with A1's derivative rules stubbed nothing can take a gradient, so the partitioners' tests wait
for A1). scripts/check_kit.py proves each assignment passes with every other one stubbed but
these, and that each one listed is needed. notes/assignments.md is the syllabus and
notes/assignments/A<n>.md the handouts.
"""
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Assignment:
    id: str                    # "A3": the regions' id, and the handout's name
    name: str                  # as the regions' BEGIN markers spell it
    marker: str                # pytest -m <marker>
    lab: tuple                 # the lab's command after the interpreter, --quick included
    catch2: str = ""           # a Catch2 tag ("[A1]") where the C++ tests cover the stage
    requires: tuple = field(default_factory=tuple)  # assignments whose stage this one's tests use
    lab_out: bool = True       # the lab takes --out DIR (it writes figures)
    versions: bool = False     # its work differs by Python version: graded on every one built


ASSIGNMENTS = {a.id: a for a in [
    Assignment("A1", "derivative rules", "a1",
               ("labs/bench/bench_training.py", "--quick", "--only", "chain8|softmax"), catch2="[A1]",
               lab_out=False),
    Assignment("A2", "the recompute partitioner", "a2",
               ("labs/bench/bench_training.py", "--quick", "--only", "chain8|softmax|layer norm"),
               requires=("A1",), lab_out=False),
    # A3 and A4 are the code generator's two halves: each one's tests compile kernels through the
    # other, so a tree with both stubbed writes them together (with --only, one at a time)
    Assignment("A3", "fusion legality and the greedy scheduler", "a3", ("labs/fusion_wins.py", "--quick"),
               catch2="[A3]", requires=("A4",)),
    Assignment("A4", "how each op is spelled in C++", "a4", ("labs/fusion_wins.py", "--quick"),
               requires=("A3",)),
    Assignment("A5", "the tensor guard (TENSOR_MATCH)", "a5", ("labs/shape_thrash.py", "--quick")),
    Assignment("A6", "a guard cache policy", "a6", ("labs/cache_storm.py", "--quick"),
               requires=("A5",)),
    Assignment("A7", "automatic dynamic shapes", "a7", ("labs/shape_thrash.py", "--quick"),
               requires=("A5",)),
    Assignment("A8", "the min-cut partitioner", "a8",
               ("labs/bench/bench_training.py", "--quick", "--only", "chain8|softmax|layer norm",
                "--partitioner", "min-cut"),
               requires=("A1", "A2"), lab_out=False),
    Assignment("A9", "resume units", "a9", ("labs/graph_breaks.py", "--quick"),
               requires=("A5",), versions=True),
    # A10 renders CUDA through A4's table and A3's kernels; its tests need no GPU or toolkit
    Assignment("A10", "a CUDA reduction's layout", "a10", ("labs/reduction_layouts.py", "--quick"),
               catch2="[A10]", requires=("A3", "A4")),
]}

