"""What the hardware should deliver: topology files, detection of this machine's topology, and the
alpha-beta model that predicts every case from them."""
