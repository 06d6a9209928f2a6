"""The docs site's HTML hook: Sphinx roles in docstrings read as plain code spans."""

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "docs" / "_hooks" / "gradflow_docs.py"


def _hooks():
    spec = importlib.util.spec_from_file_location("gradflow_docs", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_role_prefixes_before_code_spans_are_dropped():
    strip = _hooks().strip_roles
    # as mkdocstrings renders ":func:`gradflow.softmax`" and friends
    html = ("use :func:<code>gradflow.softmax</code>, :class:<code>Trajectory</code>, "
            ":data:<code>gradflow.STATUS</code> and :py:func:<code>f</code>")
    assert strip(html) == ("use <code>gradflow.softmax</code>, <code>Trajectory</code>, "
                           "<code>gradflow.STATUS</code> and <code>f</code>")
    # a role-like word not followed by a code span is text and stays (control)
    assert strip("the ratio 3:func: x") == "the ratio 3:func: x"
    assert strip("<code>:func:</code>") == "<code>:func:</code>"
