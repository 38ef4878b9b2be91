"""The typed records of a result file and their checks: results, settings, environment, proof, curve, breakdown, frontier and generation sections, the field rules and the schema. No torch."""
