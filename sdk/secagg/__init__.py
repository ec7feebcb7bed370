"""Secure aggregation (SecAgg, Bonawitz et al. 2017; SecAgg+, Bell et al. 2020), transport-free.

The server learns the sum of the round's quantized updates and nothing about any one of them.
:class:`~pflkit.sdk.secagg.client.SecAggClient` and
:class:`~pflkit.sdk.secagg.server.SecAggServer` are state machines that exchange the plain
dataclasses of :mod:`~pflkit.sdk.secagg.messages` in four steps (advertise keys, share keys,
masked input, unmask); whoever carries the messages (a test, pfl-server's HTTP API, the Java
client) authenticates their senders. The threat model is an honest-but-curious server and
devices that may drop out at any step. A device refuses what only a lying server sends (see
:class:`~pflkit.sdk.secagg.client.SecAggClient`), but an active server is not covered: keys
are not signed, and one that tells devices different survivor lists (the papers'
consistency round) can unmask an update.
"""
