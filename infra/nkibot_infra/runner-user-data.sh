#!/bin/bash
# nkibot Trn1 runner bootstrap on the Neuron base DLAMI (Ubuntu 24.04).
# The stack substitutes the @@NAME@@ placeholders; everything else runs as written.
set -euxo pipefail

REGION="@@REGION@@"
JOBS_QUEUE_URL="@@JOBS_QUEUE_URL@@"
INBOX_QUEUE_URL="@@INBOX_QUEUE_URL@@"
APP_KEY_SECRET="@@APP_KEY_SECRET@@"
ANTHROPIC_SECRET="@@ANTHROPIC_SECRET@@"
APP_ID="@@APP_ID@@"
LOG_GROUP="@@LOG_GROUP@@"
PIP_SPEC='@@PIP_SPEC@@'
BEDROCK_MODEL_ID="@@BEDROCK_MODEL_ID@@"
TARGET="@@TARGET@@"

apt-get update -y
apt-get install -y python3-venv python3-pip git jq

# A dedicated, unprivileged user; the neuron group owns /dev/neuron* on the DLAMI.
getent group neuron >/dev/null || groupadd --system neuron
id nkibot >/dev/null 2>&1 || useradd --system --home-dir /var/lib/nkibot --shell /usr/sbin/nologin nkibot
usermod -aG neuron nkibot
install -d -o nkibot -g nkibot /var/lib/nkibot /var/log/nkibot
install -d /etc/nkibot /opt/nkibot/bin

# nkibot plus the Neuron SDK's Python packages (compiler, nki, torch-neuronx) from the Neuron pip index.
python3 -m venv /opt/nkibot/venv
/opt/nkibot/venv/bin/pip install --upgrade pip
/opt/nkibot/venv/bin/pip install --extra-index-url https://pip.repos.neuron.amazonaws.com \
  "neuronx-cc==2.*" torch-neuronx nki awscli "$PIP_SPEC"

cat > /etc/nkibot/runner.env <<ENV
NKIBOT_QUEUE_URL=sqs://$INBOX_QUEUE_URL
NKIBOT_JOBS_QUEUE_URL=sqs://$JOBS_QUEUE_URL
NKIBOT_APP_ID=$APP_ID
NKIBOT_AWS_REGION=$REGION
NKIBOT_BACKEND=neuron
NKIBOT_TARGET=$TARGET
NKIBOT_BEDROCK_MODEL_ID=$BEDROCK_MODEL_ID
NKIBOT_STATE_PATH=/var/lib/nkibot/state.db
NKIBOT_LOG_JSON=true
AWS_DEFAULT_REGION=$REGION
PATH=/opt/nkibot/venv/bin:/opt/aws/neuron/bin:/usr/local/bin:/usr/bin:/bin
ENV

# Sandboxed children (user modules, kernels) run as this uid: it owns nothing, is in no
# group of ours, and can never read the runner's secrets (docs/security.md, "Secrets").
id nkibot-sandbox >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin nkibot-sandbox

# Secrets are read at each service start into a tmpfs file only the runner's uid can read
# (0400 in a 0700 directory). The runner reads it into memory at start (NKIBOT_SECRETS_FILE)
# and keeps the values out of its environment; systemd never loads it as an EnvironmentFile.
cat > /opt/nkibot/bin/fetch-secrets <<SCRIPT
#!/bin/bash
set -euo pipefail
install -d -m 0700 -o nkibot -g nkibot /run/nkibot
aws() { /opt/nkibot/venv/bin/aws --region "$REGION" "\$@"; }
key=\$(aws secretsmanager get-secret-value --secret-id "$APP_KEY_SECRET" --query SecretString --output text)
anthropic=\$(aws secretsmanager get-secret-value --secret-id "$ANTHROPIC_SECRET" --query SecretString --output text)
umask 0377
rm -f /run/nkibot/secrets.env.new
{
  printf 'NKIBOT_PRIVATE_KEY=%s\n' "\$(printf '%s' "\$key" | awk '{printf "%s\\\\n", \$0}')"
  printf 'NKIBOT_ANTHROPIC_API_KEY=%s\n' "\$anthropic"
} > /run/nkibot/secrets.env.new
chown nkibot:nkibot /run/nkibot/secrets.env.new
chmod 0400 /run/nkibot/secrets.env.new
mv -f /run/nkibot/secrets.env.new /run/nkibot/secrets.env
SCRIPT
chmod 0755 /opt/nkibot/bin/fetch-secrets

# CloudWatch agent ships the runner's log file to the stack's log group.
curl -fsSL -o /tmp/cwagent.deb https://amazoncloudwatch-agent.s3.amazonaws.com/ubuntu/amd64/latest/amazon-cloudwatch-agent.deb
dpkg -i /tmp/cwagent.deb
cat > /opt/aws/amazon-cloudwatch-agent/etc/amazon-cloudwatch-agent.json <<CW
{"logs": {"logs_collected": {"files": {"collect_list": [
  {"file_path": "/var/log/nkibot/runner.log", "log_group_name": "$LOG_GROUP",
   "log_stream_name": "{instance_id}"}]}}}}
CW
/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl -a fetch-config -m ec2 \
  -c file:/opt/aws/amazon-cloudwatch-agent/etc/amazon-cloudwatch-agent.json -s

# The systemd unit (infra/systemd/nkibot-runner.service) follows, written by the stack.
