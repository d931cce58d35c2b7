"""The Kevin loop: m trajectories x n turns of generate -> parse -> evaluate -> feed back
(``session``), its settings (``settings``), trajectory bookkeeping (``trajectories``) and what it
needs from its surroundings (``runtime``)."""
