from django.db import models


class Order(models.Model):
    customer_email = models.EmailField()
    item = models.CharField(max_length=100)
    total_cents = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    confirmation_sent = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"order {self.id} ({self.item} for {self.customer_email})"


class SentEmail(models.Model):
    """The outbox: one row per confirmation the worker sent (written in the job's own transaction)."""

    order = models.OneToOneField(Order, on_delete=models.CASCADE, related_name="confirmation")
    to = models.EmailField()
    subject = models.CharField(max_length=200)
    sent_at = models.DateTimeField(auto_now_add=True)
    attempt = models.PositiveSmallIntegerField()
