"""What the server admits: the plugin's checks on options and requests, installed by plugin.py.

    cli_aliases.py     the seed cards' option names for SGLang's own options
    startup_checks.py  hybrid settings that cannot speculate fail at startup naming the options
    replay_ssm.py      the request pool SGLang refuses DFLASH under ReplaySSM on a GDN target
    input_checks.py    malformed requests that would kill SGLang's scheduler get a 400
    request_checks.py  requests refused per request with a 400 naming the feature

May import: errors and SGLang only.
"""
