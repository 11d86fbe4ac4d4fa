"""The Neuron backend: neuronx-cc compile, NeuronCore run and profile, NEFF cache, log parsing."""
