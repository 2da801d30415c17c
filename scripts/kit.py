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
from fnmatch import fnmatch


@dataclass(frozen=True)
class Part:
    """A part of a handout's points table: its name there, its points, and which tests count in
    it. A test counts in the first part of its assignment one of whose selectors it matches:
      "test_guards.py"                  every test of that file (a pattern: "test_capture_*.py")
      "test_guards.py § tensor match"   the tests under the file's section comment whose title
                                        begins so ("# ---- tensor match ----")
      "test_aot.py::test_a_widened*"    a test by name (a pattern, parameters included)
      "C++ rule *"                      a Catch2 case by name ("C++ *": every one)
    An instructor's hidden test file named as a visible one, with its sections, counts alike."""
    name: str
    points: int
    tests: tuple

    def takes(self, file, section, name):
        """Whether a test (file name, its section's title or "", its name) counts in this part;
        a C++ case has file "C++"."""
        for selector in self.tests:
            if file == "C++":
                if selector.startswith("C++ ") and fnmatch(name, selector[4:]):
                    return True
            elif "::" in selector:
                if fnmatch(f"{file}::{name}", selector):
                    return True
            elif " § " in selector:
                pattern, title = selector.split(" § ", 1)
                if fnmatch(file, pattern) and (section or "").startswith(title):
                    return True
            elif not selector.startswith("C++") and fnmatch(file, selector):
                return True
        return False


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
    parts: tuple = ()          # the handout's points table but its written questions (Part)

    def part_of(self, file, section, name):
        return next((p for p in self.parts if p.takes(file, section, name)), None)

    @property
    def question_points(self):
        return 100 - sum(p.points for p in self.parts)


ASSIGNMENTS = {a.id: a for a in [
    Assignment("A1", "derivative rules", "a1",
               ("labs/bench/bench_training.py", "--quick", "--only", "chain8|softmax"), catch2="[A1]",
               lab_out=False, parts=(
                   Part("every rule against finite differences", 45, ("test_autograd.py::test_gradcheck*", "C++ *")),
                   Part("eager autograd through your rules", 25, ("test_autograd.py",)),
                   Part("the rules traced into graphs", 10, ("test_guard_fuzz.py", "test_attention_node.py")))),
    Assignment("A2", "the recompute partitioner", "a2",
               ("labs/bench/bench_training.py", "--quick", "--only", "chain8|softmax|layer norm"),
               requires=("A1",), lab_out=False, parts=(
                   Part("the choices the partition makes", 40,
                        ("test_aot.py::test_a_widened_log_softmax*", "test_aot.py::test_cross_entropy_rebuilds*",
                         "test_aot.py::test_recompute_partitioner_saves*", "test_aot.py::test_a_backward_graph*")),
                   Part("compiled training equals eager through your partition", 40, ("test_aot.py",)))),
    # A3 and A4 are the code generator's two halves: each one's tests compile kernels through the
    # other, so a tree with both stubbed writes them together (with --only, one at a time)
    Assignment("A3", "fusion legality and the greedy scheduler", "a3", ("labs/fusion_wins.py", "--quick"),
               catch2="[A3]", requires=("A4",), parts=(
                   Part("each rule and check alone", 15, ("C++ rule *", "C++ check *")),
                   Part("each check's verdict and sentence in the walk", 15, ("C++ *",)),
                   Part("kernel counts and the decision log", 30,
                        ("test_inductor.py § kernel-count parity", "test_inductor.py § the fusion log",
                         "test_inductor.py § buffer planning", "test_inductor.py § horizontal fusion")),
                   Part("the kernels run right", 20, ("test_inductor.py",)))),
    Assignment("A4", "how each op is spelled in C++", "a4", ("labs/fusion_wins.py", "--quick"),
               requires=("A3",), parts=(
                   Part("random programs equal eager", 40,
                        ("test_inductor_fuzz.py::test_random_programs_match_eager*",
                         "test_inductor_fuzz.py::test_random_programs_train_like_eager*")),
                   Part("the fuzzer's regressions", 25, ("test_inductor_fuzz.py",)),
                   Part("the source itself", 15, ("test_golden_source.py",)))),
    Assignment("A5", "the tensor guard (TENSOR_MATCH)", "a5", ("labs/shape_thrash.py", "--quick"), parts=(
        Part("the tensor guard, field by field", 40, ("test_guards.py § tensor match",)),
        Part("every other guard beside yours", 15, ("test_guards.py",)),
        Part("the guard fuzzer, compiled programs", 25, ("test_guard_fuzz.py", "test_inductor.py")))),
    Assignment("A6", "a guard cache policy", "a6", ("labs/cache_storm.py", "--quick"),
               requires=("A5",), parts=(
                   Part("right answers, a bounded cache", 30, ("test_cache_policy.py § right answers",)),
                   Part("what a policy must never do", 15, ("test_cache_policy.py § what the policy must never",)),
                   Part("the goal torch's policy misses", 15, ("test_cache_policy.py",)),
                   Part("the lab's table", 10, ("test_labs_fusion.py",)))),
    Assignment("A7", "automatic dynamic shapes", "a7", ("labs/shape_thrash.py", "--quick"),
               requires=("A5",), parts=(
                   Part("which sizes turn", 30, ("test_dynamic_shapes.py § sizes",)),
                   Part("which numbers turn", 20, ("test_dynamic_shapes.py § Python numbers",)),
                   Part("graphs that run at every size", 30, ("test_dynamic_shapes.py", "test_labs_capture.py")))),
    Assignment("A8", "the min-cut partitioner", "a8",
               ("labs/bench/bench_training.py", "--quick", "--only", "chain8|softmax|layer norm",
                "--partitioner", "min-cut"),
               requires=("A1", "A2"), lab_out=False, parts=(
                   Part("cuts checked by hand", 45, ("test_min_cut.py § small graphs",)),
                   Part("a real model", 10, ("test_min_cut.py::test_min_cut_partitioner_trains_a_gpt*",)),
                   Part("never worse than the alternatives", 25, ("test_min_cut.py", "test_aot.py")))),
    Assignment("A9", "resume units", "a9", ("labs/graph_breaks.py", "--quick"),
               requires=("A5",), versions=True, parts=(
                   Part("graphs and breaks, cause by cause", 35, ("test_graph_breaks.py",)),
                   Part("state across a break", 20,
                        ("test_capture_*.py", "test_compile_stats.py", "test_misuse_catalog.py")),
                   Part("the labs", 25, ("test_labs_capture.py", "test_labs_article_kernels.py")))),
    # A10 renders CUDA through A4's table and A3's kernels; its tests need no GPU or toolkit
    Assignment("A10", "a CUDA reduction's layout", "a10", ("labs/reduction_layouts.py", "--quick"),
               catch2="[A10]", requires=("A3", "A4"), parts=(
                   Part("each function's contract", 35, ("test_cuda_reduction_layout.py § the decisions",)),
                   Part("through the renderer and the planners", 30, ("test_cuda_reduction_layout.py", "C++ *")),
                   Part("the lab", 15, ("test_labs_reduction_layouts.py",)))),
]}

# The course page's schedule (notes/assignments.md, "Schedule"): one assignment a week.
SCHEDULE = ("A5", "A6", "A7", "A9", "A1", "A2", "A8", "A3", "A4", "A10")


def needed_by(assignment_id):
    """Every assignment whose stage `assignment_id`'s tests go through, directly or not."""
    found, todo = set(), list(ASSIGNMENTS[assignment_id].requires)
    while todo:
        a = todo.pop()
        if a not in found:
            found.add(a)
            todo += ASSIGNMENTS[a].requires
    return found - {assignment_id}


def week_stubs(assignment_id):
    """What a week's tree stubs: that week's assignment and every later one in SCHEDULE, but the
    ones it needs (which stay the reference's: A3's week keeps A4, whose tests need each other)."""
    later = SCHEDULE[SCHEDULE.index(assignment_id):]
    return [a for a in later if a not in needed_by(assignment_id)]
