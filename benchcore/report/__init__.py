"""What a person reads: tables, JSON and CSV on stdout (render), the PNG plots, and the report page (Markdown,
self-contained HTML, the data as CSV or Parquet)."""
