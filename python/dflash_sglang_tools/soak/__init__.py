"""`make soak` (docs/reliability.md): mixed requests at high concurrency with aborts and forced
retractions against real servers, greedy outputs checked against no-spec and every pool checked
back at its baseline afterwards.

    workload.py   the request mix (lengths, sampling settings, which ones get aborted)
    run.py        one configuration: start the server, send the mix, check outputs and pools
    __main__.py   the configurations (overlap, plain, draft window, hybrid) and the report

A tool around the server: may import the library and testing/, never imported by it.
"""
