"""The method contract and the engine: the protocols a method implements, its base class and
registry, the training schedule, the loop, evaluation, step graphs, errors and op counting. Imports
no part and no method."""
