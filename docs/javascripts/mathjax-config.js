// MathJax 3 for pymdownx.arithmatex (generic mode). The MathJax script itself
// (tex-svg.js, self-contained: no fonts or network needed) is copied into the site at
// build time from the `django-static-mathjax` package (the [docs] extra).
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex"
  },
  svg: { fontCache: "global" }
};
