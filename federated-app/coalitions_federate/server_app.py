"""coalitions-federate: the ServerApp.

Reads the run config (``[tool.flwr.app.config]``, overridden by ``flwr run --run-config``),
waits for ``sites`` SuperNodes, measures the game or trains ``method`` over them and
writes the ``output`` folder: the server's steps of coalitions.learners.federated.
"""

from coalitions.learners.federated.apps import server_app as app

__all__ = ["app"]
