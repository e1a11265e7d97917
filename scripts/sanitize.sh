#!/usr/bin/env bash
# Runs the automaton (its table learning included), tree-choice, block-quantized kernel (file layout and repacked), fused-layer (a whole pass in one call included), attention-kernel and sampled-row-scan tests against an AddressSanitizer +
# UndefinedBehaviorSanitizer build of the extensions. The build happens in a temporary copy of the sources,
# so the normal in-place build is left alone. Exits non-zero on a test failure
# or on any sanitizer report.
#
#   scripts/sanitize.sh [extra pytest arguments]
#
# Needs gcc (with libasan) and the project's Python environment: the active one,
# else .venv/ in the repository, else $PYTHON.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -n "${PYTHON:-}" ]]; then
    python="$PYTHON"
elif [[ -z "${VIRTUAL_ENV:-}" && -x "$root/.venv/bin/python" ]]; then
    python="$root/.venv/bin/python"
else
    python="python"
fi

asan="$(gcc -print-file-name=libasan.so)"
if [[ "$asan" != /* || ! -e "$asan" ]]; then
    echo "sanitize.sh: libasan.so not found (gcc -print-file-name=libasan.so gave '$asan')" >&2
    exit 2
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/racer-sanitize.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Sources only: no built extension, no generated C++.
cp "$root/setup.py" "$root/pyproject.toml" "$work/"
[[ -f "$root/README.md" ]] && cp "$root/README.md" "$work/"
cp -r "$root/racer_core" "$work/racer_core"
find "$work/racer_core" \( -name '*.so' -o -name '__pycache__' \) -prune -exec rm -rf {} +
rm -f "$work/racer_core/drafting/automaton/_automaton.cpp" "$work/racer_core/budget/_tree_choice.cpp" "$work/racer_core/models/formats/quant/_quant.cpp" "$work/racer_core/verify/_attention.cpp" "$work/racer_core/verify/_row_scan.cpp"
mkdir "$work/tests"
mkdir -p "$work/tests/core"
cp "$root"/tests/core/test_automaton*.py "$root"/tests/core/test_table_learning.py "$root"/tests/core/test_tree_choice_native.py "$root"/tests/core/test_tree_label_native.py "$root"/tests/core/tree_helpers.py "$root"/tests/core/test_quant_kernel.py "$root"/tests/core/test_quant_repack.py "$root"/tests/core/test_quant_layer.py "$root"/tests/core/test_whole_step.py "$root"/tests/core/quant_helpers.py "$root"/tests/core/test_bit_exact_attention.py "$root"/tests/core/test_row_scan.py "$work/tests/core/"
# the original's `python -m unittest tests.test_automaton_paper_alignment` entry point, which a test runs
cp "$root/tests/test_automaton_paper_alignment.py" "$work/tests/"

echo "== building the sanitized extension in $work"
(cd "$work" && RACER_SANITIZE=1 "$python" setup.py -q build_ext --inplace >"$work/build.log" 2>&1) || {
    cat "$work/build.log" >&2
    exit 1
}
for so in "$work"/racer_core/drafting/automaton/_automaton*.so "$work"/racer_core/budget/_tree_choice*.so "$work"/racer_core/models/formats/quant/_quant*.so "$work"/racer_core/verify/_attention*.so "$work"/racer_core/verify/_row_scan*.so; do
    # grep reads all of ldd's output: with -q it could exit at the first match, and
    # under pipefail ldd's SIGPIPE would then fail the check at random.
    if ! ldd "$so" | grep libasan >/dev/null; then
        echo "sanitize.sh: $so is not linked against libasan" >&2
        exit 1
    fi
done

cd "$work"
export LD_PRELOAD="$asan"
# Python leaks by design; keep everything else fatal and visible.
# Reports go to files as well: pytest captures fd 2, and a process the
# sanitizer stops never hands its captured output back.
mkdir "$work/reports"
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode=86:log_path=$work/reports/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$work/reports/ubsan"
export PYTHONMALLOC=malloc  # let ASan see Python's allocations too
export PYTHONPATH="$work"
export PYTHONDONTWRITEBYTECODE=1
# The tests run here without tests/conftest.py, which keeps what the suite leaves in the temp folder
# (torch's inductor cache folder, made on importing transformers' model code) inside its run: here the
# whole temp folder is the work folder's, removed with it.
mkdir "$work/tmp"
export TMPDIR="$work/tmp"

"$python" -c "
import sys, racer_core.drafting.automaton._automaton as m, racer_core.budget._tree_choice as c, racer_core.models.formats.quant._quant as q, racer_core.verify._attention as a, racer_core.verify._row_scan as r
for mod in (m, c, q, a, r):
    assert mod.__file__.startswith('$work'), 'imported ' + mod.__file__ + ', not the sanitized build'
    print('== testing', mod.__file__)
"

log="$work/pytest.log"
set +e
"$python" -m pytest -q -p no:cacheprovider --capture=sys tests/core "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
if compgen -G "$work/reports/*" >/dev/null; then
    cat "$work"/reports/* >&2
    echo "sanitize.sh: sanitizer report above" >&2
    exit 1
fi
if grep -qE "ERROR: AddressSanitizer|runtime error:|SUMMARY: (Address|UndefinedBehavior)Sanitizer" "$log"; then
    echo "sanitize.sh: sanitizer report above" >&2
    exit 1
fi
if [[ $status -ne 0 ]]; then
    echo "sanitize.sh: tests failed (exit $status)" >&2
    exit "$status"
fi
echo "== sanitized automaton, tree-choice, quant kernel, attention and row-scan tests passed"
