"""What tests share: ways to run Hermes and to wait for what it does."""
