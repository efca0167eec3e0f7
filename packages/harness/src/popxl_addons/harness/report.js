// The harness report's only script: sort a variant table by a header, filter its rows by words.
"use strict";

// A cell's sort key: its data-v number (null when the figure is missing), else its text.
function sortKey(cell) {
  const v = cell.getAttribute("data-v");
  if (v === null) return cell.textContent.trim().toLowerCase();
  return v === "" ? null : parseFloat(v);
}

for (const table of document.querySelectorAll("table.variants")) {
  const body = table.tBodies[0];
  for (const th of table.querySelectorAll("th[data-col]")) {
    th.querySelector("button").addEventListener("click", () => {
      const col = Number(th.getAttribute("data-col"));
      const dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
      for (const other of table.querySelectorAll("th[aria-sort]")) other.removeAttribute("aria-sort");
      th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
      const rows = Array.from(body.rows);
      rows.sort((a, b) => {
        const x = sortKey(a.cells[col]);
        const y = sortKey(b.cells[col]);
        // Missing figures go last whichever the direction.
        if (x === null || y === null) return x === y ? 0 : x === null ? 1 : -1;
        return (x < y ? -1 : x > y ? 1 : 0) * dir;
      });
      body.append(...rows);
    });
  }
}

for (const input of document.querySelectorAll("input[data-filter]")) {
  const id = input.getAttribute("data-filter");
  const rows = Array.from(document.getElementById(id).tBodies[0].rows);
  const shown = document.getElementById(id + "-shown");
  input.addEventListener("input", () => {
    const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
    let count = 0;
    for (const row of rows) {
      const text = row.getAttribute("data-text");
      row.hidden = !words.every((w) => text.includes(w));
      if (!row.hidden) count += 1;
    }
    shown.textContent = `${count} of ${rows.length} shown`;
  });
}
