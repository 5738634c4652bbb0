"""run.py's HTTP client (urllib): the mock's control routes, the gateway's probes."""

import json
import urllib.error
import urllib.request


def http(method, url, body=None, timeout=30, headers=None):
    """(status, body bytes) of a JSON request; HTTP errors are answers too."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers=dict({"content-type": "application/json"},
                                              **(headers or {})))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def get_json(url):
    return json.loads(http("GET", url)[1])
