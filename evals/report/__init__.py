"""What a reader sees: plotly figures (``charts``), the static HTML report (``html``) and the local server
for marimo exports (``serve``)."""
