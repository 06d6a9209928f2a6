"""``benchmarks/spectrum.py``'s report from given numbers (the measurement itself takes minutes to an
hour and is not run here): the table's ratios are the eigenvalues' own."""

from benchmarks import spectrum


def test_report_from_given_numbers():
    largest = [100.0 / (i + 1) for i in range(64)]
    res = dict(n=10, top=64, measured="now", elapsed_s=5.0, machine=dict(git_revision="abc1234"),
               rows=[dict(t=10.0, loss=1.5, rtol=1e-6, steps=7, flow_s=3.0, largest=largest,
                          smallest=[-(i + 1) * 0.01 for i in range(64)])])  # descending, as eigsh's are sorted
    text = spectrum.report(res, "python -m benchmarks.spectrum")
    row = next(ln for ln in text.splitlines() if ln.startswith("| 10 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "100" and cells[5] == "12.5" and cells[8] == "1.562"  # λ1, λ8, λ64
    assert cells[9] == "8" and cells[10] == "64"  # λ1/λ8, λ1/λ64
    assert cells[11] == "-0.64"  # the most negative eigenvalue
