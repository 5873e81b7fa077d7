from django.db import models


class Order(models.Model):
    customer = models.EmailField()
    total_cents = models.IntegerField(default=0)
    confirmed = models.BooleanField(default=False)
    confirmations = models.IntegerField(default=0)

    class Meta:
        app_label = "testapp"


class Note(models.Model):
    text = models.TextField()

    class Meta:
        app_label = "testapp"
