"""Release sign-off: merge per-backend JUnit reports and decide the conformance verdict.

Stages, one module each: `discovery` (which files), `loading` (safe parsing), `substitution`
(evidence standing in for local reports), `declared` (what each backend declares), `classify`
(one outcome per test), `completeness` (missing and duplicated ids), `verdict`, `merge`
(``reports/conformance.xml``), `report_md` / `report_json` / `report_html` (with `chart`,
`headroom`, `failure_groups`, `provenance_warnings`), `evidence`, and `cli`
(``python -m conformance signoff``). `engine.run_signoff` ties them together; every issue they
raise is an `issue.Issue` coded by a check of `checks.CHECKS`. The files it writes and their
atomic writes are the run contract's (`conformance.runs.outputs`, `conformance.runs.atomic`).
"""
