"""What every decoder shares: the Decoder protocol (base), the family plug-in shape (family), the forward meter,
acceptance on a verify forward, stop strings, numerics, the host transfer and the diffusion families' text side
(over_text). The families themselves are in :mod:`streamgen.families`."""
