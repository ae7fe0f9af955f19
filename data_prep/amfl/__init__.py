"""AMFL simulations: multimodal sample sources, the client population and its federation."""
