"""AWS CDK app for nkibot: queues, the webhook service, the Trn1 runner, secrets, alarms."""
