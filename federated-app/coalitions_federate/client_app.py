"""coalitions-federate: the ClientApp.

One per site: finds the site's data from its node config (``site-schema``, or
``partition-id`` with the server's dataset) and answers the server's query, train and
evaluate messages: the sites' steps of coalitions.learners.federated.
"""

from coalitions.learners.federated.apps import client_app as app

__all__ = ["app"]
