"""The campaign's page: `ars dashboard` serves it live, `ars report` writes it once as report.html.

facts     the campaign as JSON: `ars campaign status --json` plus its rows, tree, chart and
          timeline, each computed by the function status, report and `ars campaign tree` use
folders   the campaigns under a folder, by name (the only way a client names one)
reading   a campaign folder read into facts (cached per row: rows are only ever appended),
          and the run logs the page may show
svg       the progress chart, the experiment tree and the timeline as inline SVG
page      the one renderer: the whole page, or its fragments for a live update
server    Starlette app: the page, the JSON API, Server-Sent Events from one shared poller
cli       `ars dashboard`: options, the token, uvicorn (imported only when it serves)
"""
