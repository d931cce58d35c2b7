"""The outside observer: a candidate's outputs and time as another process sees them.

Inside the candidate's process (the GPU worker), model-written Python and native code can read
and write any memory, so nothing that process reports is evidence. The judge process (started
beside the worker, before any candidate code exists) observes instead: it makes each call's
inputs itself from seeds the worker never sees, releases them to the worker through device
memory it shares at the moment a timed batch starts, times the batch with its own events on its
own stream, and reads the outputs straight from the worker's device memory, at positions it
draws after the worker said the batch was done. ``wire`` is the channel between the two,
``transport`` the sharing (CUDA IPC, or shared files as the CPU stand-in), ``observer`` the
judge's side and ``served`` the worker's. torch (lazily) and the standard library only.
"""
