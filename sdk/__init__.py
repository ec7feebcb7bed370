"""pflkit.sdk: everything that runs on a device or in simulation.

Models split into body and head, the personalized-FL algorithms, data and partitioners,
metrics, the on-device state store and the HTTP client apps embed. Imports nothing from
``pflkit.server`` or ``pflkit.export``.
"""

__version__ = "0.1.0"
