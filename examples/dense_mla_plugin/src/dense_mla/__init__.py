"""An example MLA backend plugged into the MLA Conformance Suite from outside its tree."""
