"""Brokers, bundles and ownership: the cluster a served engine plays (``engineBrokers`` > 1).

One process hosts every broker. The engine below keeps one set of components (coordinators, topics, pending-ack
stores); this room says which broker owns each of them and gives each broker what a Pulsar broker has of its own:
an address, a runtime configuration fed by a delayed watch, a ``/metrics`` registry, a process start time and a
claimed version. ``bundles.py`` splits namespaces as Pulsar does; ``brokers.py`` holds the brokers and the owners.
"""

from .brokers import Broker, Cluster, UnknownBroker
from .bundles import DEFAULT_BUNDLES, bundle_of, bundle_ranges

__all__ = ["Broker", "Cluster", "UnknownBroker", "DEFAULT_BUNDLES", "bundle_of", "bundle_ranges"]
