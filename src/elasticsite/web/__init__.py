"""What the HTTP services share: credentials in headers, error bodies, page headers and forms.

The broker, the advisor, urgent computing and the dashboard each serve their own
routes on the one server; what they have in common lives here, below all of them,
so no service imports another for it.
"""
