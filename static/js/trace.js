// Trace detail: position the timing bars (CSP forbids inline styles).
for (const bar of document.querySelectorAll(".timeline .bar span")) {
  bar.style.left = `${bar.dataset.left}%`;
  bar.style.width = `${bar.dataset.width}%`;
}
