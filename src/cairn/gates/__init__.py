"""The gates stage: what decides whether an image of a release may ship."""
