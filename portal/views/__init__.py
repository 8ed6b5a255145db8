"""Views, one module per area of the portal so each stays small."""
