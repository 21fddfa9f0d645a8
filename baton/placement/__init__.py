"""The placement controller (seed 001): objects, control groups, reconciliation, leader transfer."""
